"""Code both ends of WheelFed need: wire protocol, transports, sketches, maths, the model format.

Everything here must import with the edge dependencies alone (numpy, paho-mqtt, cbor2): the
gateway runs it.
"""

__version__ = "0.1.0"
