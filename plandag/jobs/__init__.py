"""Applications on the core (ARCHITECTURE.md, "Layout"): each registers its tools and checks
through the ``plandag.tools`` entry-point group; nothing in the core imports them."""
