"""Alert deliveries over HTTP, to public hosts only, within a deadline.

The host is checked twice: when a rule is saved (``channels.http.url_errors``: an http(s) URL whose host is a
plain DNS name or an IP literal, no user info, no private address) and when a delivery is sent:
the name is resolved once, every address it resolves to must be public, and the connection goes
to the address that was checked (pinned; TLS still verifies the certificate of the name), so a
name that resolves differently the second time (DNS rebinding) reaches nothing new. A whole try,
connecting, sending and reading the status line and headers, ends after ``deadline_s``: a
receiver that trickles bytes is cut off. Redirects are not followed: a 3xx is the answer.

>>> public_ip("93.184.216.34"), public_ip("10.0.0.1"), public_ip("::ffff:127.0.0.1"), public_ip("64:ff9b::a9fe:a9fe")
(True, False, False, False)
>>> host_error("127%2E0%2E0%2E1.attacker.test"), host_error("hooks.example.com"), host_error("[::1]")
('not a host name: letters, digits, hyphens and dots only (IDNA names as xn--)', '', '')
"""
from __future__ import annotations

import http.client
import ipaddress
import re
import socket
import ssl
import threading
from urllib.parse import urlsplit

LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")
NOT_PUBLIC_V6 = [ipaddress.ip_network(n) for n in (
    "64:ff9b::/96", "64:ff9b:1::/48",  # NAT64: an IPv4 address behind a gateway
    "2002::/16",                        # 6to4: an IPv4 address inside
    "2001::/32",                        # Teredo
    "fec0::/10",                        # site-local (deprecated, still routed in places)
    "::/96",                            # IPv4-compatible
    "::ffff:0:0:0/96",                  # IPv4-translated (SIIT)
)]


class Refused(Exception):
    """A delivery the transport will not make (the reason is safe to show)."""


def public_ip(text: str) -> bool:
    """Whether an address is on the public internet (not private, loopback, link-local,
    reserved, multicast, nor an IPv4 address wrapped in IPv6)."""
    ip = ipaddress.ip_address(text.split("%", 1)[0])
    if ip.version == 6 and (ip.ipv4_mapped is not None or any(ip in net for net in NOT_PUBLIC_V6)):
        return False
    return ip.is_global and not ip.is_multicast


def ip_literal(host: str) -> str | None:
    try:
        return str(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        return None


def host_error(host: str) -> str:
    """What is wrong with a URL's host as written ('' when it is a DNS name or an IP literal)."""
    if ip_literal(host) is not None:
        return ""
    name = host[:-1] if host.endswith(".") else host
    if not name or len(name) > 253 or not all(LABEL.match(label) for label in name.split(".")):
        return "not a host name: letters, digits, hyphens and dots only (IDNA names as xn--)"
    return ""


def resolve(host: str, port: int, *, allow_private: bool) -> str:
    """The address to connect to: the first ``host`` resolves to, once every one of them was
    checked."""
    literal = ip_literal(host)
    if literal is not None:
        addresses = [literal]
    else:
        try:
            addresses = [info[4][0] for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]
        except OSError:
            raise Refused(f"{host} does not resolve") from None
    if not addresses:
        raise Refused(f"{host} does not resolve")
    if not allow_private and not all(public_ip(a) for a in addresses):
        raise Refused(f"{host} resolves to an address that is not public; deliveries go to public hosts only")
    return addresses[0]


class _Pinned(http.client.HTTPConnection):
    def __init__(self, host: str, port: int, address: str, timeout: float):
        super().__init__(host, port, timeout=timeout)
        self.address = address

    def connect(self) -> None:
        self.sock = socket.create_connection((self.address, self.port), self.timeout)


class _PinnedTLS(http.client.HTTPSConnection):
    def __init__(self, host: str, port: int, address: str, timeout: float):
        super().__init__(host, port, timeout=timeout, context=ssl.create_default_context())
        self.address = address

    def connect(self) -> None:
        sock = socket.create_connection((self.address, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)


def post(url: str, body: bytes, headers: dict[str, str], *, deadline_s: float, allow_private: bool) -> int:
    """POST ``body`` to ``url``; the receiver's HTTP status. Raises Refused, or OSError /
    http.client errors for a receiver that fails or does not answer within ``deadline_s``."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.scheme not in ("http", "https") or not host or host_error(host):
        raise Refused("not an http(s) URL with a host name")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    address = resolve(host, port, allow_private=allow_private)
    conn = (_PinnedTLS if parts.scheme == "https" else _Pinned)(host, port, address, timeout=deadline_s)
    cut = threading.Event()

    def cut_off() -> None:
        cut.set()
        sock = conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    timer = threading.Timer(deadline_s, cut_off)
    timer.daemon = True
    timer.start()
    try:
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        conn.request("POST", path, body=body, headers=headers)
        status = conn.getresponse().status
    except (OSError, http.client.HTTPException) as exc:
        if cut.is_set():
            raise TimeoutError(f"no answer within {deadline_s:g} s") from None
        raise exc
    finally:
        timer.cancel()
        conn.close()
    if cut.is_set():
        raise TimeoutError(f"no answer within {deadline_s:g} s")
    return status
