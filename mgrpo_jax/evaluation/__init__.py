"""Held-out evaluation of the agents on the test world (unseen entities).

  held_out       the mode's controller in one process over the test questions: accuracy
                 with a 95% interval, per type, format rate, calls, copy diagnostics,
                 a greedy pass; the policies built from checkpoints (`evaluate_sources`)
  turn_accuracy  teacher-forced greedy exact match of each of the clean oracles' turns
  imitation_ceiling  the best teacher-forced accuracy any model can reach on noisy
                 demonstrations whose mistakes are drawn per task
  stage          one evaluation of a run, written once per label (`run_evaluation`), with
                 its trajectory page
  trajectories   the scored records as the trajectory page's data (`page_questions`)
"""
