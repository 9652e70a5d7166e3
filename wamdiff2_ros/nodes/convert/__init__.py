"""Conversion between ROS messages and the plain types of the lower layers."""
