// Package verify holds what gpumesh checks about GPUs: the inventory a
// supplier claims, benchmark challenges, attestations and reputation.
//
// The datasheet profile of each known device model, and the mapping of
// the names NVML reports to canonical model slugs such as "h100-sxm",
// live in the leaf package catalog, which verify's sub-packages use for
// sizing and judging challenges.
//
// verify sits below node in the import graph: it must never import node
// (or cmd). Sub-package inventory detects the GPUs of this machine.
package verify
