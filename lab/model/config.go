package model

// Objective selects what a model is trained to predict.
type Objective string

const (
	// Autoregressive: predict the next symbol from the previous Context
	// symbols; loss in bits per byte.
	Autoregressive Objective = "ar"
	// MaskedDiffusion: a true masked-diffusion objective. For each window a
	// mask rate t ~ U(0,1] is drawn, each position is masked with
	// probability t, the model predicts every position from the corrupted
	// window, and the loss is the NLL on masked positions (weighted as the
	// objective requires); evaluated in nats per masked token.
	MaskedDiffusion Objective = "mdm"
	// CentreMasked: the cheap variant; only the centre position of each
	// window is masked and predicted; nats per masked token.
	CentreMasked Objective = "centre"
)

// Config is one complete training recipe of a tiny LM. The lab's reference
// configurations and every mechanism card are expressed as edits of a
// Config. Field semantics are documented on the fields; Validate reports
// out-of-range values.
type Config struct {
	Objective Objective

	// Data and architecture.
	Vocab      int     // symbols (bytes folded to this many); default 96
	Context    int     // window length in symbols; default 8
	Embed      int     // embedding width per symbol; default 16
	Hidden     int     // hidden width of each layer; default 128
	Layers     int     // hidden layers; default 1
	Activation string  // "tanh", "relu", "gelu", "silu"
	Norm       string  // "none", "layernorm", "rmsnorm" (applied before each hidden layer's activation input)
	Residual   bool    // residual connections between equal-width hidden layers
	InitScale  float64 // multiplier on the default (fan-in) init std; default 1
	Dropout    float64 // dropout rate on hidden activations during training; 0 = off

	// Objective details.
	LabelSmoothing float64 // ε of label smoothing; 0 = off

	// Optimisation.
	Optimizer   string  // "adam", "adamw", "sgd", "momentum", "lion"
	LR          float64 // peak learning rate; default 2e-3
	Beta1       float64 // Adam β1 / momentum; default 0.9
	Beta2       float64 // Adam β2; default 0.999
	AdamEps     float64 // default 1e-8
	WeightDecay float64 // decoupled for adamw/lion, L2 for the others; 0 = off
	ClipNorm    float64 // global gradient-norm clip; 0 = off

	// Schedule.
	Schedule    string  // "constant", "cosine", "linear", "wsd"
	Warmup      int     // linear warm-up steps; 0 = off
	MinLRFrac   float64 // final LR as a fraction of LR for decaying schedules
	DecayFrac   float64 // WSD: fraction of steps in the final decay phase
	Steps       int     // optimiser steps; default 1000
	Batch       int     // windows per step; default 64
	EvalWindows int     // validation windows evaluated (deterministic positions); default 4096
}
