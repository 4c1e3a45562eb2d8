"""Contract extraction: fields of contracts with their evidence (quotes and offsets into the
extracted text), and their evaluation against CUAD-shaped labels."""
