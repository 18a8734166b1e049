"""The pods sub-commands (up, ls, stop, start, down, reap, exec) and the steps of up."""
