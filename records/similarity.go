package records

// Similarity scores how alike tasks a and b are, in [0, 1], for proposers
// that borrow the records of related tasks (the best-known and in-context
// baselines): 1 for the same task (same ID), 0.5 for another task of the
// same family, 0 otherwise. It is symmetric and a task is most similar to
// itself. Library choice: the family is the unit of generalisation of
// METHOD.md §1 Data and evaluation, so records of the same family are the
// nearest evidence a held-out task has.
func Similarity(a, b Task) float64 {
	switch {
	case a.ID == b.ID:
		return 1
	case a.Family != "" && a.Family == b.Family:
		return 0.5
	}
	return 0
}
