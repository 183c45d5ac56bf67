"""SourceLearn: learn a persistent, grounded source model (construct -> self-study -> task learning).

One module per stage: ``model`` (the source model), ``grounding`` (the gates), ``construct`` (M0),
``selfstudy`` (MS), ``taskguided`` (MT), ``activation`` (task time), ``method`` (registered
variants), ``audit`` (analyses that read saved models).
"""
