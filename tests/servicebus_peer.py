"""A small AMQP 1.0 peer speaking enough of Azure Service Bus for the real `azure-servicebus` SDK to send to it.

No local broker speaks Service Bus's sign-in, so this one does, on python-qpid-proton in a background thread, over
plain TCP on a free localhost port (the SDK's UseDevelopmentEmulator=true connection string). What it does as
Service Bus does:
- SASL ANONYMOUS (what the SDK asks for), then claims-based security: `put-token` requests on the `$cbs` node,
  answered on the `$cbs` reply link with a status-code and status-description: 202 when the token's `skn` names
  the configured key, its HMAC-SHA256 signature verifies with that key, it has not expired and its `sr` covers the
  audience (`name`) it is put for; 401 otherwise; 404 when the audience names an entity that does not exist.
  Accepted tokens count for their connection only.
- A sender link to an entity is refused with amqp:not-found when the entity does not exist, and with
  amqp:unauthorized-access when no accepted token on the connection covers it.
- Messages are accepted in order and kept in memory with subject, message_id, content_type and body; a batch
  (one data section per encoded message) is unpacked into its messages.
What it does not do: TLS, topics' subscriptions and filters, receiving, sessions, duplicate detection, token
expiry while connected, entity-level policies and per-claim rights (Send/Listen/Manage), the management node
(`$management`; the SDK's sender does not use it), size quotas beyond advertising the Standard tier's 256 KiB.
"""

import hmac
import threading
import time
from dataclasses import dataclass
from urllib.parse import parse_qs, urlparse

from proton import Condition, Data, Delivery, Endpoint, Handler, Link, Message, int32, symbol
from proton.reactor import ApplicationEvent, Container, EventInjector

from events.servicebus import sas_signature
from tests.conftest import free_port

DATA_SECTION = 0x75
MAX_MESSAGE_SIZE = 262_144  # the Standard tier's limit, advertised on the attach
CREDIT = 100
# The SDK reads an AMQP error's info field without checking it is there, and proton leaves out a null one.
_TRACKING = {symbol("com.microsoft:tracking-id"): "servicebus-peer"}


@dataclass(frozen=True)
class ReceivedMessage:
    transfer: int  # which transfer (counted from 1 per peer) carried it: messages of one batch share it
    subject: str | None
    message_id: str | None
    content_type: str | None
    body: bytes


@dataclass(frozen=True)
class TokenCheck:
    """One put-token request and the answer it got."""

    audience: str
    status_code: int


def _data_sections(payload: bytes) -> list[bytes]:
    """The contents of the data sections of one transfer's payload, in order."""
    contents = []
    while payload:
        section = Data()
        payload = payload[section.decode(payload):]
        section.rewind()
        section.next()
        described = section.get_object()
        if described.descriptor == DATA_SECTION:
            contents.append(bytes(described.value))  # a view into `section`'s buffer: copy it while it lives
    return contents


def _messages(payload: bytes) -> list[Message]:
    """The messages of one transfer: itself, or the ones a batch carries. proton's Python binding does not show a
    transfer's message-format, so a batch is known by its shape: each data section holds an encoded message,
    which starts with a section descriptor (0x00 0x53); the SDK copies the first message's properties onto it."""
    contents = _data_sections(payload)
    batch = bool(contents) and all(content.startswith(b"\x00S") for content in contents)
    messages = []
    for encoded in contents if batch else [payload]:
        message = Message()
        message.decode(encoded)
        messages.append(message)
    return messages


def _covers(resource: str, audience: str) -> bool:
    """A token's resource URI covers itself and everything under it; Service Bus compares them ignoring case."""
    resource, audience = resource.lower().rstrip("/"), audience.lower().rstrip("/")
    return audience == resource or audience.startswith(resource + "/")


def _received(transfer: int, message: Message) -> ReceivedMessage:
    def text(value: object) -> str | None:
        return None if value is None else str(value)  # proton hands message ids and symbols as their own types

    body = message.body  # the SDK sends bytes as a data section; anything else is kept as its text
    return ReceivedMessage(transfer, text(message.subject), text(message.id), text(message.content_type),
                           bytes(body) if isinstance(body, bytes | memoryview) else str(body).encode())


class _ServiceBus(Handler):
    """The proton event handler, on the container's thread; what the tests read goes through the peer's lock."""

    def __init__(self, peer: "ServiceBusPeer") -> None:
        super().__init__()
        self.peer = peer
        self.acceptor = None
        self.audiences: dict[object, set[str]] = {}  # connection -> audiences whose token was accepted
        self.cbs_replies: dict[object, Link] = {}  # connection -> the link put-token answers go out on
        self.transfers = 0

    def on_reactor_init(self, event) -> None:
        self.acceptor = event.container.listen(f"127.0.0.1:{self.peer.port}")
        self.peer.listening.set()

    def on_stop_peer(self, event) -> None:
        """Stop listening, and close every connection with an error without waiting for the client's answer, so
        the container runs out of work and its thread ends."""
        self.acceptor.close()
        for connection in list(self.audiences):
            connection.condition = Condition("amqp:connection:forced", "The service is shutting down.", _TRACKING)
            connection.close()
            connection.transport.close_tail()  # read nothing more; the close frame still goes out
        self.peer.injector.close()

    def on_connection_remote_open(self, event) -> None:
        self.audiences[event.connection] = set()
        event.connection.open()

    def on_connection_remote_close(self, event) -> None:
        self._forget(event.connection)
        event.connection.close()

    def on_transport_closed(self, event) -> None:  # also when the client just goes away
        self._forget(event.connection)

    def _forget(self, connection) -> None:
        self.audiences.pop(connection, None)
        self.cbs_replies.pop(connection, None)

    def on_session_remote_open(self, event) -> None:
        event.session.open()

    def on_session_remote_close(self, event) -> None:
        event.session.close()

    def on_link_remote_close(self, event) -> None:
        if not event.link.state & Endpoint.LOCAL_CLOSED:
            event.link.close()

    def on_link_remote_open(self, event) -> None:
        link = event.link
        if not link.state & Endpoint.LOCAL_UNINIT:
            return
        link.source.copy(link.remote_source)
        link.target.copy(link.remote_target)
        if link.is_sender:  # the client receives: only put-token answers are on offer
            if link.remote_source.address == "$cbs":
                self.cbs_replies[link.connection] = link
                link.open()
            else:
                self._refuse(link, "amqp:not-implemented", "This peer does not deliver messages.")
            return
        address = link.remote_target.address or ""
        if address == "$cbs":
            link.open()
            link.flow(CREDIT)
            return
        entity = urlparse(address).path.strip("/")
        if entity not in self.peer.queues:
            self._refuse(link, "amqp:not-found", f"The messaging entity '{address}' could not be found.")
        elif not any(self._covers(audience, entity) for audience in self.audiences.get(link.connection, ())):
            self._refuse(link, "amqp:unauthorized-access",
                         "Unauthorized access. 'Send' claim(s) are required to perform this operation.")
        else:
            link.max_message_size = MAX_MESSAGE_SIZE
            link.open()
            link.flow(CREDIT)

    @staticmethod
    def _refuse(link: Link, condition: str, description: str) -> None:
        """Attach, then detach with the error, as Service Bus does."""
        link.open()
        link.condition = Condition(condition, description, _TRACKING)
        link.close()

    @staticmethod
    def _covers(audience: str, entity: str) -> bool:
        path = urlparse(audience).path.strip("/")
        return path in ("", entity)

    def on_delivery(self, event) -> None:
        delivery, link = event.delivery, event.link
        if not link.is_receiver or delivery.partial:
            return
        if link.state & Endpoint.LOCAL_CLOSED or link.connection.state & Endpoint.LOCAL_CLOSED:
            return  # sent before the client saw its link refused or its connection closed: never accepted
        payload = link.recv(delivery.pending)
        messages = _messages(payload)
        if link.remote_target.address == "$cbs":
            for message in messages:
                self._put_token(link.connection, message)
        else:
            entity = urlparse(link.remote_target.address).path.strip("/")
            self.transfers += 1
            with self.peer.lock:
                self.peer.queues[entity].extend(_received(self.transfers, message) for message in messages)
        delivery.update(Delivery.ACCEPTED)
        delivery.settle()
        link.flow(1)

    def _put_token(self, connection, request: Message) -> None:
        properties = request.properties or {}
        audience = str(properties.get("name", ""))
        # `type` goes unchecked: the SDK calls its SAS tokens "jwt", and Service Bus knows a token by its content.
        if properties.get("operation") != "put-token":
            status, description = 400, "Only put-token is supported."
        else:
            status, description = self.peer.check_token(str(request.body), audience)
        if 200 <= status < 300:
            self.audiences[connection].add(audience)
        with self.peer.lock:
            self.peer.token_checks.append(TokenCheck(audience, status))
        reply = Message(correlation_id=request.id,
                        properties={"status-code": int32(status), "status-description": description})
        self.cbs_replies[connection].send(reply)


class ServiceBusPeer:
    """Start with `start()` (or as a context manager); `queues[name]` lists what each entity received."""

    def __init__(self, key_name: str, key: str, entities: tuple[str, ...] = ("events",)) -> None:
        self.key_name, self._key = key_name, key
        self.port = free_port()
        self.queues: dict[str, list[ReceivedMessage]] = {name: [] for name in entities}
        self.token_checks: list[TokenCheck] = []
        self.lock = threading.Lock()
        self.listening = threading.Event()
        self.injector = EventInjector()
        self._container = Container(_ServiceBus(self))
        self._container.selectable(self.injector)
        self._thread = threading.Thread(target=self._container.run, name="servicebus-peer", daemon=True)

    def check_token(self, token: str, audience: str) -> tuple[int, str]:
        """Service Bus's verdict on a SAS token put for `audience`: (status code, description)."""
        scheme, _, encoded = token.partition(" ")
        fields = {name: values[0] for name, values in parse_qs(encoded).items()}
        if (scheme != "SharedAccessSignature" or not {"sr", "sig", "se", "skn"} <= fields.keys()
                or not fields["se"].isdigit()):
            return 401, "InvalidToken: The token is not a shared access signature."
        if fields["skn"] != self.key_name:
            return 401, "InvalidSignature: The token has an invalid signature."
        expected = sas_signature(fields["sr"], self._key, int(fields["se"]))
        if not hmac.compare_digest(expected.encode(), fields["sig"].encode()):
            return 401, "InvalidSignature: The token has an invalid signature."
        if int(fields["se"]) <= time.time():
            return 401, "ExpiredToken: The token is expired."
        if not _covers(fields["sr"], audience):
            return 401, "InvalidAudience: The token audience does not cover the resource."
        entity = urlparse(audience).path.strip("/")
        if entity and entity not in self.queues:
            return 404, f"The messaging entity '{audience}' could not be found."
        return 202, "Accepted"

    def statuses(self) -> list[int]:
        """The status code of every put-token answered so far."""
        with self.lock:
            return [check.status_code for check in self.token_checks]

    def received(self, entity: str) -> list[ReceivedMessage]:
        with self.lock:
            return list(self.queues[entity])

    def start(self) -> "ServiceBusPeer":
        self._thread.start()
        if not self.listening.wait(5):
            raise RuntimeError("the Service Bus peer did not start listening")
        return self

    def stop(self) -> None:
        """Close the listener and every connection, as a namespace going away would; later connects are refused."""
        if self._thread.is_alive():
            self.injector.trigger(ApplicationEvent("stop_peer"))
            self._thread.join(5)
            if self._thread.is_alive():
                raise RuntimeError("the Service Bus peer did not stop")

    def __enter__(self) -> "ServiceBusPeer":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
