// Package inventory finds the GPUs of this machine, or presents simulated
// ones for testnets.
//
// A [Detector] returns a []GPU. Three implementations exist, chosen by a
// [Spec] parsed from the --gpus flag:
//
//   - "auto": [NewNVML] asks the NVIDIA Management Library through
//     go-nvml. A machine without the library (or without a loaded driver)
//     has no GPUs; that is logged at info and is not an error, so a node
//     without GPUs still runs as DHT server, auditor, relay or light client.
//   - "none": no GPUs.
//   - "sim:MODEL:COUNT[,MODEL:COUNT...]": [NewSimulated] presents GPUs
//     built from the verify profile table, marked Simulated, with UUIDs
//     derived from a seed (the node identity) so they are stable.
//
// go-nvml is used only through its nvml.Interface, so tests substitute
// go-nvml's own mocks (pkg/nvml/mock/dgxh100 and friends).
package inventory
