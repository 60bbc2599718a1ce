"""Deployment of geofl on Flower 1.42: the round loop's server side in a ServerApp, the
client step on each site's data in a ClientApp, connected through a SuperLink
(:mod:`geofl.deploy.flower`). Needs the optional ``deploy`` extra (``flwr``)."""
