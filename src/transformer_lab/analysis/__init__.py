"""Reading a trained model: its attention maps, captured and drawn (the command's and the callback's)."""
