"""The gateway end of the sensor link: binary frames over serial, recording and replay."""
