"""`python -m service`: the online commands (serve, bench), the same as `ssi serve` / `ssi bench`."""

import typer

from service.cli import register

app = typer.Typer(name="service", no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)


@app.callback()
def main() -> None:
    """Serve SSI search over HTTP (and measure it)."""


register(app)

if __name__ == "__main__":
    app()
