// Package market holds orders, quotes, leases, the order book, matching,
// pricing and settlement of the gpumesh marketplace.
//
// For now it holds the Offer type, one supplier's GPUs of one model as
// search shows them, and the filter language shared by search, rent and the
// HTTP API:
//
//	model=h100-sxm|a100-80gb count>=8 cc>=9.0 price<=2.10 verified=true
//
// A filter is a list of space-separated terms KEY OP VALUE with no spaces
// inside a term. OP is one of = != < <= > >=; "|" separates alternatives of
// a value and is allowed only with = (any alternative matches) and !=
// (none matches). All terms must hold for an offer to match; the empty
// filter matches everything. See ParseFilter for the keys and their types.
//
// Money is integer micro-units (10⁻⁶ of the price currency): a price in a
// filter is parsed exactly, never through a float.
//
// market imports no other gpumesh package; its callers feed it data.
package market
