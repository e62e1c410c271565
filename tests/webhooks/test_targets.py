"""Safe webhook targets (issue 50, item 5): what is refused at registration and at delivery, and the POST itself
against real local receivers (a redirect not followed, the answer cut to an excerpt, a timeout, TLS to a pinned
address). Each receiver counts its requests: a refused target gets none."""

from __future__ import annotations

import datetime
import http.server
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from precis.webhooks.targets import (
    EXCERPT_BYTES,
    MAX_URL_LENGTH,
    RefusedTarget,
    Unreachable,
    check_url,
    post,
    vet,
)

# ---------------------------------------------------------------- registration: the URL alone

REFUSED_URLS = {
    "http://hooks.example.com/x": "scheme must be https",
    "ftp://hooks.example.com/x": "scheme must be https",
    "/relative/path": "scheme must be https",
    "https://user:pw@hooks.example.com/": "user name or password",
    "https://user@hooks.example.com/": "user name or password",
    "https:///nohost": "no host",
    "https://hooks.example.com:0/": "port",
    "https://hooks.example.com:99999/": "port",
    "https://hooks.example.com/a b": "whitespace or control",
    "https://hooks.example.com/\r\nX-Injected: 1": "whitespace or control",
    # literal IPv4
    "https://127.0.0.1/": "loopback",
    "https://10.1.2.3/": "private",
    "https://172.16.0.1/": "private",
    "https://192.168.1.1/": "private",
    "https://169.254.169.254/latest/meta-data/": "instance-metadata",
    "https://169.254.1.1/": "instance-metadata",
    "https://0.0.0.0/": "unspecified",
    "https://224.0.0.1/": "multicast",
    "https://240.0.0.1/": "reserved",
    "https://100.64.0.1/": "not a public address",
    # IPv4 in the forms inet_aton and browsers read as an address
    "https://2130706433/": "non-standard form",
    "https://0x7f.1/": "non-standard form",
    "https://0177.0.0.1/": "non-standard form",
    "https://127.1/": "non-standard form",
    "https://0xa9fea9fe/": "non-standard form",
    "https://1.2.3.999/": "neither a name nor an IPv4",
    "https://127.0.0.%31/": "not a valid name",
    "https://hooks.exa$mple.com/": "not a valid name",
    "https://-hooks.example.com/": "not a valid name",
    # literal IPv6, and IPv4 inside IPv6
    "https://[::1]/": "loopback",
    "https://[::]/": "unspecified",
    "https://[fe80::1]/": "link-local",
    "https://[fc00::1]/": "private",
    "https://[fd00:ec2::254]/": "instance-metadata",
    "https://[ff02::1]/": "multicast",
    "https://[::ffff:127.0.0.1]/": "loopback",
    "https://[::ffff:169.254.169.254]/": "instance-metadata",
    "https://[::ffff:a9fe:a9fe]/": "instance-metadata",
    "https://[64:ff9b::a00:1]/": "private",
    "https://[2002:a9fe:a9fe::]/": "instance-metadata",
    "https://[::127.0.0.1]/": "reserved",
}


@pytest.mark.parametrize(("url", "why"), sorted(REFUSED_URLS.items()))
def test_each_kind_of_url_is_refused_at_registration(url, why):
    with pytest.raises(RefusedTarget, match=why):
        check_url(url)


def test_a_url_longer_than_the_limit_is_refused():
    base = "https://hooks.example.com/"
    check_url(base + "a" * (MAX_URL_LENGTH - len(base)))
    with pytest.raises(RefusedTarget, match="longer than 2048"):
        check_url(base + "a" * (MAX_URL_LENGTH - len(base) + 1))


@pytest.mark.parametrize(
    ("url", "host", "port", "path"),
    [
        ("https://hooks.example.com/in?x=1", "hooks.example.com", 443, "/in?x=1"),
        ("https://Hooks.Example.com:8443", "hooks.example.com", 8443, "/"),
        ("https://bücher.example/h", "xn--bcher-kva.example", 443, "/h"),
        ("https://hooks_1.example.com./h", "hooks_1.example.com.", 443, "/h"),
        ("https://93.184.215.14/h", "93.184.215.14", 443, "/h"),
        ("https://[2606:2800:21f:cb07:6820:80da:af6b:8b2c]/h", "2606:2800:21f:cb07:6820:80da:af6b:8b2c", 443, "/h"),
    ],
)
def test_a_public_https_url_is_accepted(url, host, port, path):
    target = check_url(url)
    assert (target.scheme, target.host, target.port, target.path) == ("https", host, port, path)


def test_the_local_setting_allows_http_and_loopback_only():
    assert check_url("http://127.0.0.1:8080/hook", allow_http_local=True).port == 8080
    assert check_url("http://[::1]:8080/hook", allow_http_local=True).host == "::1"
    for url in ("http://10.0.0.1/", "http://169.254.169.254/", "http://[fd00:ec2::254]/", "http://0x7f.1/"):
        with pytest.raises(RefusedTarget):
            check_url(url, allow_http_local=True)


# ---------------------------------------------------------------- delivery: the host resolved


def resolving(*addresses: str):
    """A resolver answering these addresses for any name, as getaddrinfo does; it records the names asked."""
    asked: list[str] = []

    def resolve(host, port, family=0, kind=0):
        asked.append(host)
        return [
            (socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port)) for a in addresses
        ]

    resolve.asked = asked  # type: ignore[attr-defined]
    return resolve


@pytest.mark.parametrize(
    ("addresses", "why"),
    [
        (["10.0.0.5"], "private"),
        (["127.0.0.1"], "loopback"),
        (["169.254.169.254"], "instance-metadata"),
        (["fd00:ec2::254"], "instance-metadata"),
        (["::ffff:10.0.0.5"], "private"),
        (["fe80::1%eth0"], "link-local"),
        # one private answer among public ones: how a rebinding name is built
        (["93.184.215.14", "2606:2800:21f:cb07::1", "192.168.0.10"], "192.168.0.10 is a private"),
        (["93.184.215.14", "::1"], "loopback"),
    ],
)
def test_a_name_resolving_to_any_refused_address_is_refused(addresses, why):
    with pytest.raises(RefusedTarget, match=why):
        vet("https://hooks.example.com/in", resolver=resolving(*addresses))


def test_a_name_resolving_publicly_is_vetted_with_its_addresses():
    resolver = resolving("93.184.215.14", "93.184.215.14", "2606:2800:21f:cb07::1")
    vetted = vet("https://hooks.example.com/in", resolver=resolver)
    assert vetted.addresses == ("93.184.215.14", "2606:2800:21f:cb07::1")
    assert resolver.asked == ["hooks.example.com"]


def test_a_name_that_does_not_resolve_is_unreachable_not_refused():
    def fails(*_):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    with pytest.raises(Unreachable, match="does not resolve"):
        vet("https://nowhere.example/", resolver=fails)
    with pytest.raises(Unreachable, match="no address"):
        vet("https://nowhere.example/", resolver=resolving())


def test_the_default_resolver_refuses_a_numeric_host_it_reads_as_loopback():
    # getaddrinfo reads these as 127.0.0.1 itself; the check refuses them before any lookup.
    for url in ("https://2130706433/", "https://0x7f.1/"):
        with pytest.raises(RefusedTarget):
            vet(url)


# ---------------------------------------------------------------- the POST, against real receivers


class Receiver(http.server.ThreadingHTTPServer):
    """A local receiver recording each request (path, Host, body) and answering with `status`, `body`, `headers`."""

    def __init__(self, status=204, body=b"", headers=None):
        self.requests: list[tuple[str, str, bytes]] = []
        self.status, self.body, self.headers = status, body, headers or {}
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hook"


class _Handler(http.server.BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.requests.append((self.path, self.headers["Host"], body))
        self.send_response(self.server.status)
        for name, value in self.server.headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(self.server.body)))
        self.end_headers()
        self.wfile.write(self.server.body)

    do_GET = do_POST  # noqa: N815 (a followed redirect would GET)

    def log_message(self, *_):
        pass


@pytest.fixture
def serve() -> Iterator:
    started: list[Receiver] = []

    def start(receiver: Receiver) -> Receiver:
        threading.Thread(target=receiver.serve_forever, args=(0.02,), daemon=True).start()
        started.append(receiver)
        return receiver

    yield start
    for receiver in started:
        receiver.shutdown()
        receiver.server_close()


def test_the_local_setting_delivers_to_a_loopback_receiver(serve):
    receiver = serve(Receiver(status=200, body=b"thanks"))
    vetted = vet(receiver.url + "?a=1", allow_http_local=True)
    answer = post(vetted, b'{"type":"test.event"}', {"Content-Type": "application/json"})
    assert (answer.ok, answer.status, answer.excerpt, answer.error) == (True, 200, "thanks", None)
    assert receiver.requests == [("/hook?a=1", f"127.0.0.1:{receiver.server_address[1]}", b'{"type":"test.event"}')]


def test_without_the_local_setting_a_loopback_receiver_gets_nothing(serve):
    receiver = serve(Receiver())
    with pytest.raises(RefusedTarget, match="scheme must be https"):
        vet(receiver.url)
    with pytest.raises(RefusedTarget, match="loopback"):
        vet(receiver.url.replace("http:", "https:"))
    with pytest.raises(RefusedTarget, match="loopback"):
        vet(f"https://hooks.example.com:{receiver.server_address[1]}/hook", resolver=resolving("127.0.0.1"))
    assert receiver.requests == []


def test_a_redirect_is_a_failure_and_is_not_followed(serve):
    receiver = serve(Receiver(status=302))
    receiver.headers = {"Location": receiver.url.replace("/hook", "/elsewhere")}
    answer = post(vet(receiver.url, allow_http_local=True), b"{}", {})
    assert not answer.ok
    assert answer.status == 302
    assert answer.error == f"HTTP 302: redirects are not followed (Location: {receiver.headers['Location']})"
    assert [path for path, _, _ in receiver.requests] == ["/hook"]


def test_only_an_excerpt_of_the_answer_is_kept(serve):
    receiver = serve(Receiver(status=500, body=b"x" * EXCERPT_BYTES + b"TAIL" * 10_000))
    answer = post(vet(receiver.url, allow_http_local=True), b"{}", {})
    assert (answer.ok, answer.error) == (False, "HTTP 500")
    assert answer.excerpt == "x" * EXCERPT_BYTES
    assert post(vet(receiver.url, allow_http_local=True), b"{}", {}, excerpt_bytes=3).excerpt == "xxx"


def test_a_receiver_that_never_answers_times_out():
    # A listening socket nobody accepts from: the connection opens (the backlog), the answer never comes.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        vetted = vet(f"http://127.0.0.1:{silent.getsockname()[1]}/", allow_http_local=True)
        with pytest.raises(Unreachable, match="timed out"):
            post(vetted, b"{}", {}, timeout=0.2)


def test_a_refused_connection_tries_the_next_vetted_address(serve):
    # Nothing listens on [::1] at the receiver's port: that connection fails, the next vetted address answers.
    receiver = serve(Receiver())
    port = receiver.server_address[1]
    vetted = vet(f"http://localhost.test:{port}/hook", allow_http_local=True, resolver=resolving("::1", "127.0.0.1"))
    assert post(vetted, b"{}", {}).status == 204
    assert receiver.requests == [("/hook", f"localhost.test:{port}", b"{}")]


def test_https_connects_to_the_vetted_address_with_the_urls_name(serve, tmp_path):
    # The certificate names hooks.example.test only: the handshake succeeds only if SNI and the check use the name,
    # while the socket goes to the vetted 127.0.0.1 (no second lookup: the name does not exist).
    cert, key = _self_signed("hooks.example.test", tmp_path)
    receiver = Receiver(status=200, body=b"ok")
    names: list[str | None] = []
    server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_tls.load_cert_chain(cert, key)
    server_tls.sni_callback = lambda _sock, name, _ctx: names.append(name)
    receiver.socket = server_tls.wrap_socket(receiver.socket, server_side=True)
    serve(receiver)
    port = receiver.server_address[1]
    resolver = resolving("127.0.0.1")
    vetted = vet(f"https://hooks.example.test:{port}/in", allow_http_local=True, resolver=resolver)
    answer = post(vetted, b"{}", {}, tls=ssl.create_default_context(cafile=cert))
    assert (answer.status, answer.excerpt, names) == (200, "ok", ["hooks.example.test"])
    assert receiver.requests == [("/in", f"hooks.example.test:{port}", b"{}")]
    assert resolver.asked == ["hooks.example.test"]
    wrong = vet(f"https://other.example.test:{port}/in", allow_http_local=True, resolver=resolving("127.0.0.1"))
    with pytest.raises(Unreachable, match="certificate"):
        post(wrong, b"{}", {}, tls=ssl.create_default_context(cafile=cert))
    assert len(receiver.requests) == 1


def _self_signed(name: str, where: Path) -> tuple[str, str]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = where / "cert.pem", where / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return str(cert_path), str(key_path)
