# Shortcuts for the scripts in scripts/.
.PHONY: test demo bench lint format fuzz

test:
	./scripts/test

demo:
	./scripts/demo

bench:
	./scripts/bench

lint:
	swift format lint --strict --recursive Package.swift Sources Tests

format:
	swift format --in-place --recursive Package.swift Sources Tests

fuzz:
	./scripts/fuzz
