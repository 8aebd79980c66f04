"""Python drivers built on :mod:`delta_fabric_conformance.kit`, one module per framework, each run as
``python -m delta_fabric_conformance.drivers.<framework>`` (registered in ``interop/implementations.json``).
"""
