"""One Apache Kafka node with TLS, SASL/SCRAM and ACLs, for tests/e2e/test_kafka_security.py.

The node (stream_app/kafka_broker.py, one node: starting three costs the suite too much)
listens on three ports:

- PLAINTEXT on 127.0.0.1, the broker's own (inter-broker, controller) and the test's setup
  only: its principal, User:ANONYMOUS, is a super user;
- SECURE, SASL_SSL with SCRAM-SHA-512: the clients under test, each its own SCRAM user;
- MTLS, SSL with client certificates required (`ssl.client.auth=required`): the principal is
  the certificate's common name (`ssl.principal.mapping.rules`), so a client certificate for
  CN=ratings-producer has the ACLs of the SCRAM user ratings-producer.

The certificates are made here with `cryptography`: a CA, the broker's certificate (for
127.0.0.1 and localhost) signed by it, a client certificate signed by it, and a second CA
the broker's certificate does not chain to. Authorization is Kafka's StandardAuthorizer with
allow.everyone.if.no.acl.found=false: a principal may do only what an ACL allows it.
The SCRAM users are made when the storage is formatted (StorageTool --add-scram, random
passwords: the tool's command line shows them, fine for a test); topics and ACLs with
confluent-kafka's AdminClient as the super user `admin` over SASL_SSL, as an operator would.
"""

from __future__ import annotations

import datetime
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

import pytest

from stream_app.kafka_broker import KafkaCluster
from tests.support.brokers import KAFKA_MISSING, refuse_without_broker
from tests.support.ports import free_port

SECURE, MTLS = "SECURE", "MTLS"  # the two client listeners' names
ADMIN = "admin"
MECHANISM = "SCRAM-SHA-512"
CLIENT_CN = "ratings-producer"  # the client certificate's, and its principal's name


# -- certificates -------------------------------------------------------------------------
@dataclass(frozen=True)
class Issued:
    """A certificate and its private key, as PEM files."""

    cert: Path
    key: Path
    _objects: tuple = field(repr=False, compare=False, default=())  # (certificate, key) for signing others


def _name(common_name: str):
    from cryptography.x509.oid import NameOID
    from cryptography import x509

    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write(directory: Path, stem: str, certificate, key) -> Issued:
    from cryptography.hazmat.primitives import serialization

    cert_path, key_path = directory / f"{stem}.pem", directory / f"{stem}.key"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    # PKCS#8, unencrypted: what both Kafka's PEM key store and Python's ssl module read.
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    key_path.chmod(0o600)
    return Issued(cert_path, key_path, (certificate, key))


def make_ca(directory: Path, common_name: str) -> Issued:
    """A self-signed certificate authority, valid for a day."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name)).issuer_name(_name(common_name))
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return _write(directory, common_name, certificate, key)


def issue(ca: Issued, directory: Path, common_name: str, *, server: bool) -> Issued:
    """A certificate signed by `ca`: a server's for 127.0.0.1 and localhost, or a client's."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID

    ca_cert, ca_key = ca._objects
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name)).issuer_name(ca_cert.subject)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH if server
                                              else ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
    )
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]), critical=False)
    return _write(directory, common_name, builder.sign(ca_key, hashes.SHA256()), key)


# -- the node ---------------------------------------------------------------------------------
@dataclass
class SecureKafka:
    """The running node, its certificates and its users."""

    cluster: KafkaCluster
    directory: Path
    ca: Issued
    untrusted_ca: Issued  # a CA the broker's certificate does not chain to
    client: Issued  # signed by `ca`, subject CN=<CLIENT_CN>
    admin_password: str
    passwords: dict[str, str] = field(default_factory=dict)
    _admin: object = field(default=None, repr=False)

    @property
    def plaintext(self) -> str:
        return self.cluster.bootstrap

    @property
    def secure(self) -> str:
        return self.cluster.bootstrap_of(SECURE)

    @property
    def mtls(self) -> str:
        return self.cluster.bootstrap_of(MTLS)

    # -- configurations for the clients under test ----------------------------------------------
    def env(self, user: str, *, password: str | None = None, ca: Path | None = None) -> dict[str, str]:
        """RATINGS_KAFKA_* for `user` over SASL_SSL (with another password or CA if given)."""
        return {"RATINGS_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "RATINGS_KAFKA_SASL_MECHANISM": MECHANISM,
                "RATINGS_KAFKA_USERNAME": user,
                "RATINGS_KAFKA_PASSWORD": self.passwords[user] if password is None else password,
                "RATINGS_KAFKA_CA_FILE": str(ca or self.ca.cert)}

    def mtls_env(self, *, certificate: bool = True) -> dict[str, str]:
        """RATINGS_KAFKA_* for the MTLS listener, with the client certificate or without one."""
        env = {"RATINGS_KAFKA_SECURITY_PROTOCOL": "SSL", "RATINGS_KAFKA_CA_FILE": str(self.ca.cert)}
        if certificate:
            env |= {"RATINGS_KAFKA_CERT_FILE": str(self.client.cert), "RATINGS_KAFKA_KEY_FILE": str(self.client.key)}
        return env

    def admin(self):
        """confluent-kafka's AdminClient as `admin` over SASL_SSL (one, kept: a futures' client
        must outlive them)."""
        from confluent_kafka.admin import AdminClient

        if self._admin is None:
            self._admin = AdminClient({"bootstrap.servers": self.secure, "security.protocol": "SASL_SSL",
                                       "sasl.mechanisms": MECHANISM, "sasl.username": ADMIN,
                                       "sasl.password": self.admin_password,
                                       "ssl.ca.location": str(self.ca.cert), "socket.timeout.ms": 10000})
        return self._admin

    # -- topics and ACLs, made by `admin` -------------------------------------------------------
    def create_topics(self, topics: Iterable[tuple[str, int, dict[str, str]]]) -> None:
        """Topics (name, partitions, configuration), all in one request, one replica each."""
        from confluent_kafka.admin import NewTopic

        new = [NewTopic(name, partitions, 1, config=dict(config)) for name, partitions, config in topics]
        for future in self.admin().create_topics(new, operation_timeout=30).values():
            future.result(timeout=30)

    def allow(self, grants: Iterable[tuple[str, str, str, Iterable[str], bool]]) -> None:
        """ALLOW ACLs, all in one request: `grants` of (principal, resource type, name,
        operations, prefixed), e.g. ("User:ratings-subscriber", "TOPIC", "rating-changes",
        ["READ", "DESCRIBE"], False); prefixed: a PREFIXED resource pattern, else LITERAL."""
        from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, ResourcePatternType,
                                           ResourceType)

        bindings = [AclBinding(ResourceType[kind], name,
                               ResourcePatternType.PREFIXED if prefixed else ResourcePatternType.LITERAL,
                               principal, "*", AclOperation[operation], AclPermissionType.ALLOW)
                    for principal, kind, name, operations, prefixed in grants for operation in operations]
        for future in self.admin().create_acls(bindings, request_timeout=30).values():
            future.result(timeout=30)
        # Kafka answers CreateAcls once they are in its metadata log; its authorizer takes them
        # up after. A worker started in between (a loaded machine: a whole run's seven tests
        # at once) was refused: wait until the broker describes them all.
        from confluent_kafka.admin import AclBindingFilter

        every = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                                 AclPermissionType.ANY)
        deadline = time.monotonic() + 30
        while len(set(bindings) - set(self.admin().describe_acls(every, request_timeout=30).result(timeout=30))):
            assert time.monotonic() < deadline, "the broker did not describe the ACLs just created within 30 s"
            time.sleep(0.1)

    def stop(self) -> None:
        """The admin client first (librdkafka would log its failed reconnections), then the node:
        SIGKILL after 2 s, its data being temporary."""
        self._admin = None
        self.cluster.stop(timeout=2.0)


def start_secure_kafka(directory: Path, users: Iterable[str] = ()) -> SecureKafka:
    """Certificates in `directory`, then the node, with the SCRAM users `admin` and `users`
    (random passwords, `passwords[name]`), made when its storage is formatted; the caller
    stops it (`stop()`)."""
    refuse_without_broker("a Kafka cluster started")
    if KAFKA_MISSING:
        pytest.skip(KAFKA_MISSING)
    ca = make_ca(directory, "ratings-test-ca")
    untrusted = make_ca(directory, "some-other-ca")
    server = issue(ca, directory, "kafka-broker", server=True)
    client = issue(ca, directory, CLIENT_CN, server=False)
    keystore = directory / "broker-keystore.pem"  # key and certificate chain, as Kafka's PEM key store reads them
    keystore.write_bytes(server.key.read_bytes() + server.cert.read_bytes() + ca.cert.read_bytes())
    keystore.chmod(0o600)
    admin_password = "adm-" + os.urandom(12).hex()
    passwords = {name: "pw-" + os.urandom(12).hex() for name in users}
    settings = {
        # TLS for SECURE and MTLS: the broker's key store, and the CA it trusts for client certificates.
        "ssl.keystore.type": "PEM", "ssl.keystore.location": keystore,
        "ssl.truststore.type": "PEM", "ssl.truststore.location": ca.cert,
        "listener.name.mtls.ssl.client.auth": "required",
        "ssl.principal.mapping.rules": "RULE:^CN=([^,]+).*$/$1/,DEFAULT",  # User:CN=x,O=y -> User:x
        # SCRAM-SHA-512 on SECURE: the server side needs a login module too (no credentials of its own).
        "sasl.enabled.mechanisms": MECHANISM,
        "listener.name.secure.scram-sha-512.sasl.jaas.config":
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        # Least privilege: no ACL, no access; the broker itself (ANONYMOUS on PLAINTEXT and
        # CONTROLLER, 127.0.0.1 only) and `admin` are super users.
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "false",
        "super.users": f"User:ANONYMOUS;User:{ADMIN}",
    }
    cluster = KafkaCluster(1, ports=[free_port(), free_port()], settings=settings,
                           listeners={SECURE: "SASL_SSL", MTLS: "SSL"}, listener_ports=[free_port(), free_port()],
                           scram=[f"{MECHANISM}=[name={name},password={password}]"
                                  for name, password in {ADMIN: admin_password, **passwords}.items()]).start()
    return SecureKafka(cluster, directory, ca, untrusted, client, admin_password, passwords)


# The SCRAM users of the session's node: the service's three principals, one with no ACL,
# one that may only describe topics and a worker without its group (tests/e2e/test_kafka_security.py
# gives the ACLs).
USERS = ("ratings-worker", "ratings-producer", "ratings-subscriber", "ratings-nobody", "ratings-describer",
         "ratings-groupless")


@pytest.fixture(scope="session")
def secure_kafka(tmp_path_factory) -> Iterator[SecureKafka]:
    """The node for the session of this test process; stopped, and its data gone, afterwards."""
    kafka = start_secure_kafka(tmp_path_factory.mktemp("secure-kafka"), USERS)
    try:
        yield kafka
    finally:
        kafka.stop()

