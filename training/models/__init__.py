"""Model family. `bert` assembles the shared encoder core (embeddings, attention, encoder) and the BERT heads."""
