"""Starting an MQTT broker for WheelFed: mosquitto with the ``deploy/`` configs, or an embedded one."""

from .mosquitto import BrokerUser, MosquittoBroker, find_free_port, mosquitto_available, read_password_file

__all__ = [
    "BrokerUser",
    "EmbeddedBroker",
    "MosquittoBroker",
    "find_free_port",
    "mosquitto_available",
    "read_password_file",
]


def __getattr__(name: str):
    # amqtt is an optional dependency (extras "broker" and "dev"): import it only when asked.
    if name == "EmbeddedBroker":
        from .embedded import EmbeddedBroker

        return EmbeddedBroker
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
