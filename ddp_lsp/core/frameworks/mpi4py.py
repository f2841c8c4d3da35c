"""mpi4py in DDP terms: communicator methods every rank must call."""

from __future__ import annotations

from ddp_lsp.core.frameworks.schema import Api, Match, Meaning

NAME = "mpi4py"

_COLL = (Meaning.COLLECTIVE,)
_BARRIER = (Meaning.COLLECTIVE, Meaning.BARRIER)
# Lower case: pickled Python objects; capitalised: buffers.
_METHODS = (
    "bcast",
    "Bcast",
    "allreduce",
    "Allreduce",
    "barrier",
    "Barrier",
    "allgather",
    "Allgather",
    "gather",
    "Gather",
    "scatter",
    "Scatter",
    "reduce",
    "Reduce",
    "alltoall",
    "Alltoall",
)

TABLE: tuple[Api, ...] = (
    Api(Match.MODULE, "mpi4py", (Meaning.DISTRIBUTED,)),
    *(
        Api(Match.CALL, f"mpi4py.MPI.COMM_WORLD.{m}", _BARRIER if m.lower() == "barrier" else _COLL)
        for m in _METHODS
    ),
    # `comm = MPI.COMM_WORLD; comm.bcast(...)`.
    *(
        Api(Match.METHOD, f"COMM_WORLD.{m}", _BARRIER if m.lower() == "barrier" else _COLL)
        for m in _METHODS
    ),
    *(
        Api(Match.METHOD, f"comm.{m}", _BARRIER if m.lower() == "barrier" else _COLL)
        for m in _METHODS
    ),
)
