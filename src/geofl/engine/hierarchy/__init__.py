"""The engine of paper 003's space-assisted hierarchy (§2.2, Alg. 2–3): tractor → cluster
driver → LEO → GEO on a simulated clock, on the flat engine's round pipeline.

* :mod:`.scheduler` — :class:`~geofl.engine.hierarchy.scheduler.HierarchicalScheduler`, one
  global round: the shared client step
  (:meth:`~geofl.engine.scheduler.SyncScheduler.collect`), the tiers, the GEO step, the record;
* :mod:`.build` — the scheduler of a method (fleet, clusters, contact plans, the GEO step);
* :mod:`.events` — the clock's event types, the records they carry and the event queue;
* :mod:`.handlers` — what each event does (arrivals, driver deadlines, passes, relays,
  downlinks);
* :mod:`.tiers` — the driver and LEO combiners; :mod:`.geo` — the GEO step as a strategy;
* :mod:`.contacts`, :mod:`.drivers`, :mod:`.links` — contact windows, the drivers' ground
  stations and failovers, the sealed space hops;
* :mod:`.personal` — on-tractor personalization; :mod:`.stats` — the round's ``hierarchy``
  block; :mod:`.topology` — the fleet as the scheduler sees it.

The pure functions these use (clusters, weights, regional FedAvg, the fleet) live in
:mod:`geofl.hierarchy`.
"""
