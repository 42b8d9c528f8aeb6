"""What a policy sees: each kernel's features (:mod:`~rlclock.observation.features`), the step ahead in time and
the candidate clock configurations (:mod:`~rlclock.observation.lookahead`), and the observation vector's one layout
(:mod:`~rlclock.observation.layout`), which the env fills and the deployed policy reads.
"""
