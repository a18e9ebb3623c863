"""`genguard bisect`: which release of transformers or torch changed a snapshot test's verdict.

Torch-free on purpose (the console script imports it): the probes run in their own environments, in subprocesses.
`search` is the bisection itself, `releases` lists the candidates, `environments` builds one uv environment per
release (layered over the running one), `probing` runs the test there, `driver.bisect` ties them together and
`report` prints it.
"""
