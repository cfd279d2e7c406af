"""Starting an MQTT broker for WheelFed: mosquitto with the ``deploy/`` configs, or an embedded one."""

from .mosquitto import BrokerUser, MosquittoBroker, find_free_port, mosquitto_available

__all__ = ["BrokerUser", "MosquittoBroker", "find_free_port", "mosquitto_available"]
