"""This API-server process: its log lines and why it stops."""
