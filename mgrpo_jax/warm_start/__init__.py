"""The warm start (the paper's stage 1): each agent fine-tuned on noisy-oracle demonstrations.

  demonstrations        the scripted oracles' token sequences, through the controller
  demonstration_worlds  the training worlds the demonstrations come from
  copy_curriculum       synthetic copy sequences: small models from scratch learn to copy
  sft                   supervised fine-tuning through the jitted policy update
  stage                 the stage of a run: each trained agent's warm start in its process
"""
