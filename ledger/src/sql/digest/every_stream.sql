-- Every stream, when the marks were cleared while no builder ran.
SELECT DISTINCT stream FROM events
