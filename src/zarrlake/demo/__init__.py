"""`zarrlake demo`: the product's story told with real work on a local repository.

`data` generates the dataset (pure numpy), `spark` starts Spark and runs the ingest jobs,
`story` tells the steps through the public API, `writers` runs concurrent clients,
`render` prints, `directory` guards the target directory, and `result` is what `run`
returns (and what the tests check).
"""

from zarrlake.demo.config import DemoConfig
from zarrlake.demo.render import Narrator
from zarrlake.demo.result import DemoResult
from zarrlake.demo.story import run

__all__ = ["DemoConfig", "DemoResult", "Narrator", "run"]
