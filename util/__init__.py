"""Helpers shared by training and inference: distributed start-up, errors, images, HTML, display."""
