package verify

// TFLOPS is the dense BF16 TFLOPS of the model with this slug (FP32 for a
// model without BF16 tensor cores), rounded down; 0 for an unknown slug.
// It is what search shows of a model (market.OfferInputs.TFLOPS).
func TFLOPS(slug string) int {
	p, ok := LookupProfile(slug)
	if !ok {
		return 0
	}
	if p.BF16GFLOPS != 0 {
		return p.BF16GFLOPS / 1000
	}
	return p.FP32GFLOPS / 1000
}
