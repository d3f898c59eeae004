"""The knowledge graph: entities and relations the question model names for each atom
(:mod:`isotope.knowledge.facts`), read back under access conditions
(:mod:`isotope.stores.sql_graph`) and written in the MCP Memory server's shapes
(:mod:`isotope.knowledge.memory`)."""
