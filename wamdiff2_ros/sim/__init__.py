"""Driving-scene generator, front-camera renderer, expert ground truth, exports and the closed loop."""
