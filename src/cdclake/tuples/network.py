"""inet/cidr (utils/inet.h, port/inet_net_ntop.c) and macaddr/macaddr8 (utils/mac.c) output.

inet/cidr payload: family byte (2 = IPv4, 3 = IPv6), netmask bits, then the 4 or 16 address
bytes. inet omits the mask when it covers the whole address (/32, /128); cidr always prints it.
IPv6 follows PostgreSQL's inet_net_ntop: the longest run (>= 2) of zero words becomes "::"
(first one on ties), lowercase hex, and the IPv4-compatible/-mapped forms print the last 32
bits dotted (::1.2.3.4, ::ffff:1.2.3.4) — except ::1 itself and ::0.0.0.1-style ambiguity
handled as the C code does.
"""

from __future__ import annotations

import struct

PGSQL_AF_INET = 2
PGSQL_AF_INET6 = 3

_WORDS = struct.Struct(">8H")


class NetworkFormatError(ValueError):
    """The bytes are not an inet/cidr/macaddr datum."""


def _ipv4(addr: bytes) -> str:
    return f"{addr[0]}.{addr[1]}.{addr[2]}.{addr[3]}"


def _ipv6(addr: bytes) -> str:
    words = _WORDS.unpack(addr)
    best_base, best_len = -1, 0
    cur_base, cur_len = -1, 0
    for i, w in enumerate(words):
        if w == 0:
            if cur_base == -1:
                cur_base, cur_len = i, 1
            else:
                cur_len += 1
        elif cur_base != -1:
            if best_base == -1 or cur_len > best_len:
                best_base, best_len = cur_base, cur_len
            cur_base = -1
    if cur_base != -1 and (best_base == -1 or cur_len > best_len):
        best_base, best_len = cur_base, cur_len
    if best_base != -1 and best_len < 2:
        best_base = -1
    out: list[str] = []
    for i in range(8):
        if best_base != -1 and best_base <= i < best_base + best_len:
            if i == best_base:
                out.append(":")
            continue
        if i != 0:
            out.append(":")
        if i == 6 and best_base == 0 and (
                best_len == 6 or (best_len == 7 and words[7] != 0x0001)
                or (best_len == 5 and words[5] == 0xFFFF)):
            out.append(_ipv4(addr[12:16]))
            break
        out.append(f"{words[i]:x}")
    if best_base != -1 and best_base + best_len == 8:
        out.append(":")
    return "".join(out)


def inet_text(p: bytes, is_cidr: bool = False) -> str:
    if len(p) < 2:
        raise NetworkFormatError(f"inet datum of {len(p)} bytes")
    family, bits = p[0], p[1]
    addr = p[2:]
    if family == PGSQL_AF_INET:
        if len(addr) != 4 or bits > 32:
            raise NetworkFormatError(f"IPv4 datum with {len(addr)} address bytes, /{bits}")
        s = _ipv4(addr)
        full = 32
    elif family == PGSQL_AF_INET6:
        if len(addr) != 16 or bits > 128:
            raise NetworkFormatError(f"IPv6 datum with {len(addr)} address bytes, /{bits}")
        s = _ipv6(addr)
        full = 128
    else:
        raise NetworkFormatError(f"inet family {family} is neither IPv4 (2) nor IPv6 (3)")
    if bits != full or is_cidr:
        s = f"{s}/{bits}"
    return s


def cidr_text(p: bytes) -> str:
    return inet_text(p, is_cidr=True)


def macaddr_text(p: bytes) -> str:
    return ":".join(f"{b:02x}" for b in p)
