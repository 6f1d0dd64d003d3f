"""What a user sees and gets back: the console's trainer output, tables that fit the terminal, pipes that close
early, phase lines, the files a command writes where the user asked. May import: the top-level basics (errors,
secrets) only.
"""
