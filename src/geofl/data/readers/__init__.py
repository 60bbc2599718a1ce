"""Readers of real datasets in their on-disk formats (folders, zips, GeoTIFFs, annotation files)."""
