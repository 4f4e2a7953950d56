// Package verify holds what gpumesh knows and checks about GPUs: the
// inventory a supplier claims, the datasheet profile of each known device
// model, and (as they are added) benchmark challenges, attestations and
// reputation.
//
// The device profile table (see [Profiles], [LookupProfile] and
// [SlugForNVMLName]) is the one place that maps the names NVML reports to
// canonical model slugs such as "h100-sxm". Matching and challenge judging
// use these slugs and figures; all figures are integers. TFLOPS
// (tflops.go) is the figure search shows of a model.
//
// verify sits below node in the import graph: it must never import node
// (or cmd). Sub-package inventory detects the GPUs of this machine.
package verify
