"""Kafka connection security (TLS, SASL) from the environment.

    RATINGS_KAFKA_SECURITY_PROTOCOL  PLAINTEXT (default) | SSL | SASL_PLAINTEXT | SASL_SSL
    RATINGS_KAFKA_SASL_MECHANISM     PLAIN (default) | SCRAM-SHA-256 | SCRAM-SHA-512
    RATINGS_KAFKA_USERNAME           SASL user
    RATINGS_KAFKA_PASSWORD           SASL password (never logged, never in repr)
    RATINGS_KAFKA_CA_FILE            CA bundle to verify the brokers (default: the system's)
    RATINGS_KAFKA_CERT_FILE          client certificate (mutual TLS)
    RATINGS_KAFKA_KEY_FILE           the client certificate's private key

The same object configures aiokafka clients (`aiokafka_kwargs()`) and the Faust
app (`faust_settings()`), and says in one line why a connection was refused
(`explain()`: a certificate not trusted, a client certificate required, a wrong
password), never with the password.
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

ENV = {
    "protocol": "RATINGS_KAFKA_SECURITY_PROTOCOL",
    "sasl_mechanism": "RATINGS_KAFKA_SASL_MECHANISM",
    "username": "RATINGS_KAFKA_USERNAME",
    "password": "RATINGS_KAFKA_PASSWORD",
    "cafile": "RATINGS_KAFKA_CA_FILE",
    "certfile": "RATINGS_KAFKA_CERT_FILE",
    "keyfile": "RATINGS_KAFKA_KEY_FILE",
}


# The TLS alerts a broker that wants a client certificate sends when it gets none, or one it refuses.
_CLIENT_CERTIFICATE_ALERTS = frozenset({
    "TLSV13_ALERT_CERTIFICATE_REQUIRED", "SSLV3_ALERT_BAD_CERTIFICATE", "TLSV1_ALERT_UNKNOWN_CA",
    "SSLV3_ALERT_CERTIFICATE_UNKNOWN", "TLSV1_ALERT_ACCESS_DENIED",
    "SSLV3_ALERT_CERTIFICATE_EXPIRED", "SSLV3_ALERT_CERTIFICATE_REVOKED", "SSLV3_ALERT_UNSUPPORTED_CERTIFICATE",
})


class SecurityConfigError(ValueError):
    """An invalid security setting; the message names the environment variable."""


@dataclass(frozen=True)
class KafkaSecurity:
    protocol: str = "PLAINTEXT"
    sasl_mechanism: str = "PLAIN"
    username: str | None = None
    password: str | None = field(default=None, repr=False, compare=False)
    cafile: str | None = None
    certfile: str | None = None
    keyfile: str | None = None

    def __post_init__(self) -> None:
        self.validate()

    # -- construction --------------------------------------------------------
    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *, check_files: bool = True) -> "KafkaSecurity":
        env = os.environ if environ is None else environ

        def get(name: str) -> str | None:
            value = env.get(ENV[name])
            return value if value not in (None, "") else None

        protocol = (get("protocol") or "PLAINTEXT").upper().replace("-", "_")
        mechanism = (get("sasl_mechanism") or "PLAIN").upper().replace("_", "-")
        security = cls(
            protocol=protocol,
            sasl_mechanism=mechanism,
            username=get("username"),
            password=get("password"),
            cafile=get("cafile"),
            certfile=get("certfile"),
            keyfile=get("keyfile"),
        )
        if check_files:
            for name in ("cafile", "certfile", "keyfile"):
                path = getattr(security, name)
                if path is not None and not Path(path).is_file():
                    raise SecurityConfigError(f"{ENV[name]}={path!r}: no such file")
        return security

    def validate(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise SecurityConfigError(
                f"{ENV['protocol']}: must be one of {', '.join(PROTOCOLS)} (got {self.protocol!r})"
            )
        if self.sasl_mechanism not in MECHANISMS:
            raise SecurityConfigError(
                f"{ENV['sasl_mechanism']}: must be one of {', '.join(MECHANISMS)} (got {self.sasl_mechanism!r})"
            )
        if self.sasl and (not self.username or self.password is None):
            raise SecurityConfigError(
                f"{ENV['protocol']}={self.protocol} needs {ENV['username']} and {ENV['password']}"
            )
        if self.keyfile and not self.certfile:
            raise SecurityConfigError(f"{ENV['keyfile']} is set without {ENV['certfile']}")
        if not self.tls and (self.cafile or self.certfile or self.keyfile):
            raise SecurityConfigError(
                f"{ENV['protocol']}={self.protocol} does not use TLS, but a CA, certificate or key file is set "
                "(use SSL or SASL_SSL)"
            )

    # -- properties ------------------------------------------------------------
    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def __repr__(self) -> str:
        parts = [f"protocol={self.protocol!r}"]
        if self.sasl:
            parts += [f"sasl_mechanism={self.sasl_mechanism!r}", f"username={self.username!r}"]
            parts.append("password=" + ("'***'" if self.password is not None else "None"))
        for name in ("cafile", "certfile", "keyfile"):
            if getattr(self, name):
                parts.append(f"{name}={getattr(self, name)!r}")
        return f"KafkaSecurity({', '.join(parts)})"

    __str__ = __repr__

    # -- client settings -------------------------------------------------------
    def ssl_context(self):
        """An ssl.SSLContext for SSL / SASL_SSL (None otherwise); hostnames are checked."""
        if not self.tls:
            return None
        from aiokafka.helpers import create_ssl_context

        return create_ssl_context(cafile=self.cafile, certfile=self.certfile, keyfile=self.keyfile)

    def aiokafka_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for AIOKafkaProducer / AIOKafkaConsumer / AIOKafkaAdminClient."""
        kwargs: dict[str, Any] = {"security_protocol": self.protocol}
        if self.tls:
            kwargs["ssl_context"] = self.ssl_context()
        if self.sasl:
            kwargs["sasl_mechanism"] = self.sasl_mechanism
            kwargs["sasl_plain_username"] = self.username
            kwargs["sasl_plain_password"] = self.password
        return kwargs

    def faust_settings(self) -> dict[str, Any]:
        """Settings for faust.App(...): {'broker_credentials': ...}, or {} for PLAINTEXT."""
        import faust

        if self.sasl:
            credentials = faust.SASLCredentials(
                username=self.username,
                password=self.password,
                mechanism=self.sasl_mechanism,
                ssl_context=self.ssl_context(),  # set: SASL_SSL, None: SASL_PLAINTEXT
            )
        elif self.tls:
            credentials = faust.SSLCredentials(self.ssl_context())
        else:
            return {}
        return {"broker_credentials": credentials}

    @property
    def principal(self) -> str:
        """Who the broker takes this client for, as far as the settings tell, for messages."""
        if self.sasl:
            return f"SASL user {self.username!r}"
        if self.certfile:
            return f"the subject of the client certificate {ENV['certfile']}={self.certfile!r}"
        return "this client (User:ANONYMOUS: no SASL user, no client certificate)"

    # -- a refused connection, in one line --------------------------------------------------
    def explain(self, error: BaseException, address: str) -> str | None:
        """Why connecting to the broker at `address` failed with `error`, naming what to
        check, if it was this security setting (TLS, SASL) that failed; None otherwise (a
        broker that does not answer, say). Never the password."""
        # aiokafka's "Connection at HOST:PORT closed" holds the TLS alert that closed it as its cause.
        while not isinstance(error, ssl.SSLError) and isinstance(error.__cause__, BaseException):
            error = error.__cause__
        name = type(error).__name__
        if isinstance(error, ssl.SSLCertVerificationError):
            if error.verify_code == 62:  # X509_V_ERR_HOSTNAME_MISMATCH
                return (f"the TLS certificate of the broker at {address} is not for that address "
                        f"({error.verify_message}): connect to a name the certificate holds")
            where = (f"{ENV['cafile']}={self.cafile!r} does not hold the CA that signed it" if self.cafile else
                     f"the system's CAs do not hold the one that signed it: set {ENV['cafile']}")
            return f"the TLS certificate of the broker at {address} is not trusted ({error.verify_message}): {where}"
        if isinstance(error, ssl.SSLError):
            reason = error.reason or str(error)
            if reason == "WRONG_VERSION_NUMBER":
                return (f"the broker at {address} does not speak TLS on that port ({reason}): check the port and "
                        f"{ENV['protocol']}={self.protocol}")
            if reason in _CLIENT_CERTIFICATE_ALERTS:  # the broker's answer to this client's certificate, or to none
                if not self.certfile:
                    return (f"the broker at {address} requires a client certificate ({reason}): set "
                            f"{ENV['certfile']} and {ENV['keyfile']}")
                return (f"the broker at {address} refused the client certificate {ENV['certfile']}={self.certfile!r} "
                        f"({reason}): it must be signed by a CA the broker trusts, and valid")
            return f"TLS with the broker at {address} failed ({reason})"
        if name == "SaslAuthenticationFailed":
            return (f"the broker at {address} refused SASL user {self.username!r} with {self.sasl_mechanism} "
                    f"(SASL_AUTHENTICATION_FAILED: a wrong password or an unknown user): check {ENV['username']} "
                    f"and {ENV['password']}")
        if name == "UnsupportedSaslMechanismError":
            return (f"the broker at {address} does not take SASL mechanism {self.sasl_mechanism} there "
                    f"({error}): check {ENV['sasl_mechanism']} and the port")
        return None
