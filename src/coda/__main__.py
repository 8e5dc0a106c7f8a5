from coda.cli import app

app(prog_name="coda")
