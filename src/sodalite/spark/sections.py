"""One walk over an encoded AMQP message's sections: :mod:`sodalite.message.sections`, under the name
the reader, the sink and the syphon have always imported it by."""

from sodalite.message.sections import Walked, assemble, walk

__all__ = ["Walked", "assemble", "walk"]
