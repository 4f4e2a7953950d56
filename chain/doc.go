// Package chain settles gpumesh leases on an EVM chain: a payment
// channel contract (contracts/PaymentChannel.sol, compiled offline by
// contracts/build.sh with solc 0.8.37 into contracts/build/ and embedded
// here), an [Adapter] that deposits, redeems, closes and withdraws
// through any go-ethereum contract backend, and a [Redeemer] that
// redeems a supplier node's kept chain vouchers by itself (the
// gpumesh-settle binary, cmd/gpumesh-settle; chaintest runs a simulated
// chain for tests).
//
// The records the node itself signs and checks (the EIP-712 chain
// voucher, the ChainKey binding record and the payment key's key file)
// are in the root module's market/chainpay, which links no Ethereum
// client; this module's tests hold them to the contract's hashVoucher
// and go-ethereum's EIP-712 encoder, signer and keystore byte for byte.
//
// The package is a Go module of its own (github.com/gpumesh/gpumesh/chain)
// so that go-ethereum stays out of the node's go.mod and binary: the
// design study (notes/onchain.md) measured the production subset of
// go-ethereum at about +10.8 MB of binary (2.4 MB to 13.2 MB for a hello
// world), far over the 10% growth issue 32 allows the node. The root
// module's `go test ./...` does not enter it; `make test` runs its tests
// on a line of its own.
//
// Amounts are money.Micros; the contract moves micros times its scale in
// token base units (scale 1 for a 6-decimal stablecoin). The scheme is
// docs/PROTOCOL.md §43.
package chain
