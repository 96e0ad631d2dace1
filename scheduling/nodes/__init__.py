"""Nodes: the one home of node reads, node writers, the node API and the fault kinds.

- ``faults``: the drill fault kinds and their labels (the pure list is
  ``scheduling.simcore.faults``, shared with the simulator core).
- ``selectors``: node reads for the pages and the API (usage, blast radius, jobs,
  history).
- ``services``: the on-call writers (cordon, drain, uncordon, fault drills); each checks
  ``scheduling.permissions.may_operate_nodes``, writes an audit record and, for state
  changes, publishes ``node.updated`` after commit. The next cycle tells the backend.
- ``api``: ``/api/v1/nodes/`` (read for everyone signed in, actions for operators).

The model is ``scheduling.models.Node``; isolation of sick nodes inside the loop is the
cycle's (``scheduling.cycle``); the node pages are the on-call console's
(``monitoring.views``), and "clean residual processes now", which reports the alert the
sweep raised, is ``monitoring.node_actions``.
"""
