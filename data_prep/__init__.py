"""Turns raw images into the ImageNet folder layout the course reads (``<split>/<class>/*.JPEG``)."""
