"""The data of the prep_data rule: synthetic world, external preference sources, and their normalisation to one
pair schema."""
