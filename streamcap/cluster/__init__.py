"""The Ray Serve backend: inference replicas behind the caption gateway (`streamcap serve
--backend ray`, `streamcap replicas`; docs/scaling.md).

Only this layer imports Ray, and only in `replica`, `bridge` and `router`, which run in Ray's
processes; the gateway side (`remote`, `transport`, `wire`) imports no Ray at all.
"""
