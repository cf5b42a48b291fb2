"""The Python API: a trained run opened in Python (`load`), runs compared as a DataFrame (`runs`). The commands
(commands/) are its command line."""
