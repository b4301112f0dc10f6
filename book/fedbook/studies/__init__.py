"""Chapter experiments: the procedures that one chapter of the book runs, over fedlib's layers below."""
