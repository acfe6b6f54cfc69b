"""Shadows for every function and operator cdclake's installed functions call, planted where a
role that is not a superuser may create them.

PostgreSQL chooses, among the functions or operators of a name on the search path, an exact
match of the argument types over a polymorphic or coercing candidate, whichever schema comes
first: ``public.unnest(oid[])`` beats ``pg_catalog.unnest(anyarray)``. A shadow is therefore
only a threat with the exact argument types of a call, which no reading of the source gives
reliably (an ``ANY`` over an array, a ``VARIADIC "any"``, the type a subquery yields). The
server gives them: :func:`probe` runs a workload with ``debug_print_parse``, which logs the
parse tree of every query — those cdclake's SQL and PL/pgSQL functions run included — and
:func:`call_sites` reads each call from them: the function, operator or aggregate the
parser chose and the types its arguments had before the parser coerced them.
:func:`shadows` then writes, for each, the DDL of a function (operator, aggregate) of that
name and those argument types in a given schema: it records that it ran (a non-transactional
logical message, which outlives the DDL's transaction) and tries to make its role a
superuser. A view is written for each catalog relation the queries read, under its name,
which calls the recorder.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

#: the prefix of the message a planted object writes when it runs
RAN = "hostile.ran"
#: coercion forms (CoercionForm): a cast written out; one the parser added; SQL syntax
#: (EXTRACT ...), for which the parser names pg_catalog's function itself
EXPLICIT_CAST, IMPLICIT, SQL_SYNTAX = "1", "2", "3"
BOOL, TEXT, UNKNOWN = 16, 25, 705
#: node tags whose type is a field of their own
TYPE_FIELD = {
    "VAR": "vartype", "CONST": "consttype", "PARAM": "paramtype",
    "FUNCEXPR": "funcresulttype", "OPEXPR": "opresulttype", "NULLIFEXPR": "opresulttype",
    "AGGREF": "aggtype", "WINDOWFUNC": "wintype", "RELABELTYPE": "resulttype",
    "COERCEVIAIO": "resulttype", "ARRAYCOERCEEXPR": "resulttype",
    "CONVERTROWTYPEEXPR": "resulttype", "COERCETODOMAIN": "resulttype",
    "FIELDSELECT": "resulttype", "SUBSCRIPTINGREF": "refrestype", "CASEEXPR": "casetype",
    "CASETESTEXPR": "typeId", "COALESCEEXPR": "coalescetype", "MINMAXEXPR": "minmaxtype",
    "ARRAYEXPR": "array_typeid", "ROWEXPR": "row_typeid", "SQLVALUEFUNCTION": "type",
}
BOOLEAN_NODES = {"BOOLEXPR", "NULLTEST", "BOOLEANTEST", "SCALARARRAYOPEXPR", "DISTINCTEXPR"}
#: coercion nodes and the field saying how they were written
COERCIONS = {"RELABELTYPE": "relabelformat", "COERCEVIAIO": "coerceformat",
             "ARRAYCOERCEEXPR": "coerceformat", "FUNCEXPR": "funcformat"}


@dataclass(frozen=True)
class Node:
    tag: str
    fields: dict[str, Any]

    def get(self, name: str) -> Any:
        return self.fields.get(name)


def _tokens(text: str) -> Iterator[str]:
    """PostgreSQL's pg_strtok: whitespace separates, parentheses and braces are tokens of
    their own, a backslash escapes the next character."""
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif c in "(){}":
            yield c
            i += 1
        else:
            j = i
            while j < n and not text[j].isspace() and text[j] not in "(){}":
                j += 2 if text[j] == "\\" else 1
            yield text[i:j]
            i = j


def parse_tree(text: str) -> Any:
    """A node tree as ``nodeToString`` writes it: nodes, lists, scalar tokens, None."""
    tokens = list(_tokens(text))
    pos = 0

    def value() -> Any:
        nonlocal pos
        tok = tokens[pos]
        pos += 1
        if tok == "{":
            tag = tokens[pos]
            pos += 1
            fields: dict[str, Any] = {}
            while tokens[pos] != "}":
                name = tokens[pos][1:]
                pos += 1
                parts = []
                while tokens[pos] != "}" and not tokens[pos].startswith(":"):
                    parts.append(value())
                fields[name] = parts[0] if len(parts) == 1 else parts
            pos += 1
            return Node(tag, fields)
        if tok == "(":
            items = []
            while tokens[pos] != ")":
                items.append(value())
            pos += 1
            return items
        return None if tok == "<>" else tok

    return value()


def walk(tree: Any) -> Iterator[Node]:
    if isinstance(tree, Node):
        yield tree
        for v in tree.fields.values():
            yield from walk(v)
    elif isinstance(tree, list):
        for v in tree:
            yield from walk(v)


@dataclass(frozen=True)
class Site:
    """A call in a query: what the parser chose, and the argument types it was given."""

    kind: str  #: "function", "aggregate" or "operator"
    oid: int  #: the pg_proc or pg_operator row chosen
    args: tuple[int, ...]
    result: int
    retset: bool = False


class Types:
    """The facts about types the trees refer to by OID, asked of the server."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def element(self, array_type: int) -> int:
        return int(self.conn.execute("SELECT typelem FROM pg_type WHERE oid = %s",
                                     (array_type,)).fetchone()[0])

    def array(self, element_type: int) -> int:
        return int(self.conn.execute("SELECT typarray FROM pg_type WHERE oid = %s",
                                     (element_type,)).fetchone()[0])


def written_type(node: Any, types: Types) -> int:
    """The type of an expression as written, before the parser coerced it to its callee."""
    if not isinstance(node, Node):
        raise ValueError(f"not an expression: {node!r}")
    form = COERCIONS.get(node.tag)
    if form and node.get(form) == IMPLICIT:
        arg = node.get("args")[0] if node.tag == "FUNCEXPR" else node.get("arg")
        return written_type(arg, types)
    if node.tag == "COLLATEEXPR":
        return written_type(node.get("arg"), types)
    if node.tag in BOOLEAN_NODES:
        return BOOL
    if node.tag == "SUBLINK":
        kind = node.get("subLinkType")
        if kind in ("4", "6"):  # EXPR_SUBLINK, ARRAY_SUBLINK: the subquery's first column
            first = next(t for t in node.get("subselect").get("targetList")
                         if t.get("resjunk") != "true")
            element = written_type(first.get("expr"), types)
            return element if kind == "4" else types.array(element)
        return BOOL
    field = TYPE_FIELD.get(node.tag)
    if field is None:
        raise ValueError(f"no rule for the type of a {node.tag} node: add one")
    t = int(node.get(field))
    return TEXT if t == UNKNOWN else t


def call_sites(tree: Any, types: Types) -> set[Site]:
    """Every call a query makes by name: functions (not casts), aggregates, operators, the
    operator of an ``x op ANY (array)``."""
    out: set[Site] = set()
    for node in walk(tree):
        tag = node.tag
        if tag == "FUNCEXPR" and node.get("funcformat") not in (EXPLICIT_CAST, IMPLICIT,
                                                                  SQL_SYNTAX):
            args = tuple(written_type(a, types) for a in node.get("args") or [])
            out.add(Site("function", int(node.get("funcid")), args,
                         int(node.get("funcresulttype")), node.get("funcretset") == "true"))
        elif tag == "AGGREF":
            args = tuple(written_type(t.get("expr"), types) for t in node.get("args") or []
                         if t.get("resjunk") != "true")  # not an ORDER BY's own key
            out.add(Site("aggregate", int(node.get("aggfnoid")), args, int(node.get("aggtype"))))
        elif tag in ("OPEXPR", "DISTINCTEXPR", "NULLIFEXPR"):
            args = tuple(written_type(a, types) for a in node.get("args"))
            # NULLIF's and IS DISTINCT FROM's operator is an equality: boolean
            result = int(node.get("opresulttype")) if tag == "OPEXPR" else BOOL
            out.add(Site("operator", int(node.get("opno")), args, result))
        elif tag == "SCALARARRAYOPEXPR":
            scalar, array = node.get("args")
            args = (written_type(scalar, types), types.element(written_type(array, types)))
            out.add(Site("operator", int(node.get("opno")), args, BOOL))
        elif tag == "WINDOWFUNC":
            raise ValueError("a window function: add a rule for its shadow")
    return out


def relations(tree: Any) -> set[int]:
    """The relations a query reads, by OID."""
    return {int(n.get("relid")) for n in walk(tree)
            if n.tag == "RANGETBLENTRY" and n.get("rtekind") == "0"}


@dataclass(frozen=True)
class Call:
    """A call site as a shadow needs it, by name (the probe's database has other OIDs)."""

    kind: str  #: "function", "aggregate" or "operator"
    name: str  #: quoted, or the operator's symbol
    args: tuple[str, ...]  #: type names
    result: str
    params: str  #: a function's parameter list; an operator's LEFTARG/RIGHTARG
    returns: str  #: a function's RETURNS clause

    @property
    def signature(self) -> str:
        return f"{self.name}({', '.join(self.args)})"


def probe(conn: Any, statements: Sequence[str]) -> tuple[set[Call], set[tuple[str, str]]]:
    """The calls, and the catalog relations (name, select list), of every query that runs
    under ``statements``: the queries of the functions and triggers they run, not their
    own."""
    trees: list[str] = []
    conn.add_notice_handler(lambda d: trees.append(d.message_detail or "")
                            if d.message_primary == "parse tree:" else None)
    conn.execute("SET client_min_messages = log")
    conn.execute("SET debug_print_parse = on")
    for statement in statements:
        before = len(trees)
        conn.execute(statement)
        del trees[before]  # the statement's own, parsed before it runs
    conn.execute("RESET debug_print_parse")
    conn.execute("RESET client_min_messages")
    types = Types(conn)
    sites: set[Site] = set()
    rels: set[int] = set()
    for text in trees:
        tree = parse_tree(text)
        sites |= call_sites(tree, types)
        rels |= relations(tree)
    # a catalog's columns as a view can have them (text for a pseudo-type: anyarray)
    return {_describe(conn, s) for s in sites}, {(r[0], r[1]) for r in conn.execute(
        "SELECT quote_ident(c.relname), string_agg(CASE WHEN t.typtype = 'p' "
        "THEN format('%%I::text AS %%I', a.attname, a.attname) "
        "ELSE quote_ident(a.attname) END, ', ' ORDER BY a.attnum) "
        "FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 "
        "JOIN pg_type t ON t.oid = a.atttypid "
        "WHERE c.oid = ANY (%s) AND c.relnamespace = 'pg_catalog'::regnamespace "
        "GROUP BY c.relname", (sorted(rels),))}


def _describe(conn: Any, site: Site) -> Call:
    """``site`` by name. Its types are pg_catalog's (a shadow's DDL names them as the
    planter's session finds them: nobody plants types here)."""
    def typ(oid: int) -> str:
        return conn.execute("SELECT format_type(%s, NULL)", (oid,)).fetchone()[0]

    args = tuple(typ(a) for a in site.args)
    result = typ(site.result)
    if site.kind == "operator":
        name, left = conn.execute("SELECT oprname, oprleft <> 0 FROM pg_operator WHERE oid = %s",
                                  (site.oid,)).fetchone()
        params = (f"LEFTARG = {args[0]}, RIGHTARG = {args[1]}" if left
                  else f"RIGHTARG = {args[0]}")
        return Call("operator", name, args, result, params, "")
    name, arguments, declared, outs = conn.execute(
        "SELECT quote_ident(proname), pg_get_function_arguments(oid), "
        "pg_get_function_result(oid), "
        "coalesce('o' = ANY (proargmodes) OR 't' = ANY (proargmodes), false) "
        "FROM pg_proc WHERE oid = %s", (site.oid,)).fetchone()
    if outs:  # OUT columns: the shadow declares the same ones (such a function is not
        # polymorphic: its declared arguments are the call's), as text where PL/pgSQL refuses
        # the type (pg_ddl_command): a caller's query needs their names
        params, returns = arguments.replace("pg_ddl_command", "text"), declared
    else:
        params, returns = ", ".join(args), f"SETOF {result}" if site.retset else result
    return Call(site.kind, name, args, result, params, returns)


# -- planting ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shadow:
    """One planted object's DDL, and what it stands for (``name(types)``)."""

    signature: str
    ddl: tuple[str, ...]


def _recorder(role: str) -> str:
    """The body every planted routine runs: record, then try to take superuser."""
    return (f"PERFORM pg_catalog.pg_logical_emit_message(false, {_lit(RAN)}, "
            f"%s OPERATOR(pg_catalog.||) ' as ' OPERATOR(pg_catalog.||) current_user); "
            f"BEGIN EXECUTE {_lit(f'ALTER ROLE {role} SUPERUSER')}; "
            f"EXCEPTION WHEN insufficient_privilege THEN NULL; END;")


def _lit(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def shadows(calls: set[Call], rels: set[tuple[str, str]], schema: str,
            role: str) -> list[Shadow]:
    """The DDL planting a shadow of each call and of each relation in ``schema`` (pg_temp
    works too); ``role`` is the one they try to make a superuser."""
    planted: dict[tuple[bool, str], Shadow] = {}
    for c in sorted(calls, key=lambda c: (c.kind, c.signature)):
        # functions and aggregates share a namespace, operators have their own
        key = (c.kind == "operator", c.signature)
        if key not in planted:
            planted[key] = _shadow(c, schema, role, f"{schema}.hostile_{len(planted)}")
    return [*planted.values(),
            *(_view(rel, schema, role, f"{schema}.hostile_view_{i}")
              for i, rel in enumerate(sorted(rels)))]


def _shadow(call: Call, schema: str, role: str, helper: str) -> Shadow:
    body = _recorder(role) % _lit(f"{schema}.{call.signature}")
    if call.kind == "operator":
        return Shadow(call.signature, (
            f"CREATE FUNCTION {helper}({', '.join(call.args)}) RETURNS {call.result} "
            f"LANGUAGE plpgsql AS $$BEGIN {body} RETURN NULL; END$$",
            f"CREATE OPERATOR {schema}.{call.name} ({call.params}, FUNCTION = {helper})"))
    if call.kind == "aggregate":
        return Shadow(call.signature, (
            f"CREATE FUNCTION {helper}({', '.join([call.result, *call.args])}) "
            f"RETURNS {call.result} LANGUAGE plpgsql AS $$BEGIN {body} RETURN NULL; END$$",
            f"CREATE FUNCTION {helper}_final({call.result}) RETURNS {call.result} "
            f"LANGUAGE plpgsql AS $$BEGIN {body} RETURN NULL; END$$",
            f"CREATE AGGREGATE {schema}.{call.name}({', '.join(call.args) or '*'}) "
            f"(SFUNC = {helper}, STYPE = {call.result}, FINALFUNC = {helper}_final)"))
    valueless = (call.returns == "void" or call.returns.startswith(("SETOF", "TABLE"))
                 or "OUT " in call.params)  # a plpgsql RETURN gives no value there
    ret = "RETURN;" if valueless else "RETURN NULL;"
    return Shadow(call.signature, (
        f"CREATE FUNCTION {schema}.{call.name}({call.params}) RETURNS {call.returns} "
        f"LANGUAGE plpgsql AS $$BEGIN {body} {ret} END$$",))


def _view(rel: tuple[str, str], schema: str, role: str, helper: str) -> Shadow:
    """A view named as a catalog relation, of its columns, recording when it is read."""
    name, columns = rel
    body = _recorder(role) % _lit(f"{schema}.{name}")
    return Shadow(name, (
        f"CREATE FUNCTION {helper}() RETURNS boolean LANGUAGE plpgsql "
        f"AS $$BEGIN {body} RETURN true; END$$",
        f"CREATE VIEW {schema}.{name} AS SELECT {columns} FROM pg_catalog.{name} "
        f"WHERE {helper}()"))
