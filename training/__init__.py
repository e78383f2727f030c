"""The offline half: build the vocabulary, sample triples, train an SSI model, evaluate, export a bundle."""
