package records

// Card describes one mechanism card as data (METHOD.md §1 Vocabulary: each
// proposal instantiates one of a curated library of mechanism directions).
// A catalogue ([]Card) is the action space a proposer samples from and the
// list an LLM prompt shows; it carries no code, so any host can supply one.
type Card struct {
	Mechanism   string      `json:"mechanism"`   // mechanism direction; Proposal.Mechanism
	Description string      `json:"description"` // one or two sentences for people and prompts
	Params      []ParamSpec `json:"params,omitempty"`
	// Prior is the effect a researcher would expect from this card, written
	// down from general knowledge before measuring anything; nil = no prior.
	Prior *Prior `json:"prior,omitempty"`
}

// ParamSpec is one typed parameter of a card.
type ParamSpec struct {
	Name string `json:"name"`
	Kind string `json:"kind"` // "float", "int" or "enum"
	// Choices are the values a policy samples from, in canonical formatting
	// (see Proposal.Key). Every choice is valid.
	Choices []string `json:"choices"`
	// Min and Max bound numeric values (inclusive); unused for enums.
	Min float64 `json:"min,omitempty"`
	Max float64 `json:"max,omitempty"`
	Doc string  `json:"doc,omitempty"`
}

// Prior is an expected gain in units of the task's seed noise σ_e, with its
// uncertainty: a world model may start from N(Mean·σ_e, (Std·σ_e)²).
type Prior struct {
	Mean float64 `json:"mean_sigmas"`
	Std  float64 `json:"std_sigmas"`
}
