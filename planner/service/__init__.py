"""The HTTP planning service (docs/api.md), implemented in planner/service/server.py."""

from planner.service.server import (
    PlannerServer,
    ServiceMetrics,
    make_server,
    openapi_document,
    run_until_interrupted,
    serve,
)

__all__ = ["PlannerServer", "ServiceMetrics", "make_server", "openapi_document",
           "run_until_interrupted", "serve"]
