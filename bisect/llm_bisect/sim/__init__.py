"""A simulated OpenAI-compatible server whose health depends on the commit it serves."""
