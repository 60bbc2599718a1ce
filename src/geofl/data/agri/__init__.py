"""Paper 003's agricultural data (§3.1): farms → tractors → field blocks.

* :mod:`~geofl.data.agri.catalog` — crops and CDL codes, soils, climates, regions, features;
* :mod:`~geofl.data.agri.tables` — the joined field-block record;
* :mod:`~geofl.data.agri.synthetic` — the seeded generator;
* :mod:`~geofl.data.agri.cdl`, :mod:`~geofl.data.agri.ssurgo`, :mod:`~geofl.data.agri.vi` —
  readers for CropScape GeoTIFFs, SSURGO soil tables and weekly vegetation-index CSVs;
* :mod:`~geofl.data.agri.pipeline` — the §3.1.1 pipeline (composites, labels, features);
* :mod:`~geofl.data.agri.harder` — a harder Task B (regional drift of the rule, label noise);
* :mod:`~geofl.data.agri.dataset`, :mod:`~geofl.data.agri.files` — the registered datasets.
"""
