"""`flint chat`: a terminal conversation with a running server or an in-process engine.

session.py holds the conversation (independent of where the replies come from), commands.py
its slash commands, remote.py and local.py the two ways to get a streamed reply, screen.py
how a reply is printed, and chat.py the command's flags and read-reply loop."""
