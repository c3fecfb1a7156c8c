"""The numba backend: the Ops' ``numba_funcify`` registration (``dispatch``), binary and ordinal
EP's compiled evaluation (``compiled_ep``) and its per-thread state in compiled memory
(``thread_state``)."""
