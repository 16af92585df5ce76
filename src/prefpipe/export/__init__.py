"""Reward models that leave prefpipe: a trained model folder written in a form other tools load without
prefpipe. A BT model whose head reads only the last token's final state becomes a standard transformers
`AutoModelForSequenceClassification` folder (`sequence_classification`); every other model becomes the backbone
folder plus its head and a standalone loader module (`head_folder`, `reward_loader`). `run` picks the form and
writes the model card (`card`); `python -m prefpipe.export_reward` is the command.
"""
