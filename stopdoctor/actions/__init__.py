"""What commands do beyond judging: render and compare (`render`, `diff`), probe stop strings and
live servers (`probe`, `probe_server`), generate (the only place that loads torch models, lazily) and
stop odds. The two data pipelines are stages of their own (`stopdoctor.logs`, `stopdoctor.labels`),
and the file writers `fix` uses live in `stopdoctor.writers`. Imports the stages before it."""
